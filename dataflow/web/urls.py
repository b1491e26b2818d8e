from django.contrib.auth import views as auth_views
from django.urls import path

from dataflow.web import login, views

app_name = "dashboard"

urlpatterns = [
    path("", views.index, name="index"),
    path("live.json", views.index_live, name="index-live"),
    path("flows/<slug:name>/", views.flow_page, name="flow"),
    path("flows/<slug:name>/live.json", views.flow_live, name="flow-live"),
    # Its own login: the admin's accepts staff only, and a flow's owner need not be staff.
    path("login/", login.DashboardLoginView.as_view(), name="login"),
    path("logout/", auth_views.LogoutView.as_view(next_page="dataflow:dashboard:login"), name="logout"),
]
